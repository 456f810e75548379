"""Moving bytes between hosts: mutual TLS 1.3 and length-prefixed frames. No plaintext mode."""
