"""Token secrets: random, shown once, stored as SHA-256 (high-entropy secrets need no slow KDF)."""

import hashlib
import secrets

TOKEN_PREFIX = "rlp_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def display_prefix(token: str) -> str:
    return token[:10]
