"""Hugging Face config.json -> decoder graph (the builder follows in the next commit)."""

from mapper.core.errors import MapperError


def config_model_bytes(text: bytes, name: str) -> bytes:
    raise MapperError(f"{name}: Hugging Face configs are not read yet")
