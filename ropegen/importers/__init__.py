"""Importers: other formats (ONNX models) -> .rope specs."""
