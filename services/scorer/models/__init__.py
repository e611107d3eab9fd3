"""The served models: loading a checkpoint, the model leased per call and switched atomically, following the registry.
Imports `cheems`, `services.bus`, `services.store`, the scorer's core and `triton`; never the gRPC/HTTP edges."""
