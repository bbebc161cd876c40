"""The shared core: updates, the global model, workers and the one loop."""
