"""The toolkit: inspection and QDQ quantization."""
