"""Generated protobuf and gRPC modules for package `cheems.v1`.

The `*_pb2*.py` files here are produced from `protos/cheems/v1/*.proto` by `make proto`
(`python -m cheems.protogen .`) and are not committed; never edit them by hand.
"""
