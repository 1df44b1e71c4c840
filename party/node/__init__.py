"""The party gRPC node: server, peer clients, run state machine, storage."""
