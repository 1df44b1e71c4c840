"""The party node: encoding, protocol engine, self-audit and the gRPC node."""
