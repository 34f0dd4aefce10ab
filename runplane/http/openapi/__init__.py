"""The OpenAPI 3.1.0 document: ``@doc`` on each route, the response models, the builder."""

from .route_doc import doc

__all__ = ["doc"]
