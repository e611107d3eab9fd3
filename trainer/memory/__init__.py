"""The memory plan: each GPU's share of a training run (states, working copies, activations), from the model's
config on the meta device, before anything loads. Imports `cheems.errors` and `trainer.config`."""
