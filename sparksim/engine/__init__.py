"""The simulated vLLM OpenAI-compatible server."""
