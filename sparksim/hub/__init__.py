"""A local stand-in for the Hugging Face Hub (`HF_ENDPOINT`), docs/sparksim.md."""
