"""Generated gRPC/protobuf stubs for the pprl.v1 wire protocol (made by scripts/gen_protos.py)."""
