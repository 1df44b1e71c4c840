"""The coordinator: party registry, parameter agreement, run orchestration and progress."""
