"""What a runner pod executes: run spec -> team -> restore() -> exit code + termination message."""
