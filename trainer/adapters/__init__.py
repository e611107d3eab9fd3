"""Adapters: LoRA and QLoRA reward models, trained with peft over a frozen base (`lora_rank` > 0).

`lora` turns the loaded sequence-classification model into a LoRA one in place (adapters on the decoder's
linears, the reward head trained whole); `qlora` loads the base in 4-bit NF4 where bitsandbytes and a GPU can;
`merge`, `files` and `export` write the plain merged checkpoint every backend serves, and the adapter folder peft
loads, tensor by tensor (sharded tensors gathered one at a time).
"""
