"""slurm_sync's HS256 tokens (slurm_sync/slurm/hs256.py) are PyJWT's, byte for byte, and PyJWT verifies them;
their claims read back as PyJWT reads them; what is not a JWT is a ValueError. slurmrestd accepting them is
the Slurm lab tests' business (every test that reads Slurm through a minted token)."""

from __future__ import annotations

import jwt
import pytest

from slurm_sync.slurm import hs256

KEY = b"k" * 32
CLAIMS = [
    {"iat": 1795784108, "exp": 1795784408, "sun": "slurm"},
    {"exp": 1, "sun": "ü-user", "nested": {"a": [1, 2.5, None, True]}},
]


@pytest.mark.parametrize("claims", CLAIMS)
def test_a_token_is_pyjwts_and_verifies(claims: dict) -> None:
    token = hs256.encode(claims, KEY)
    assert token == jwt.encode(claims, KEY, algorithm="HS256")
    assert jwt.decode(token, KEY, algorithms=["HS256"], options={"verify_exp": False}) == claims


@pytest.mark.parametrize("claims", CLAIMS)
def test_claims_read_back_without_the_key(claims: dict) -> None:
    token = jwt.encode(claims, b"another key of 32 bytes or more!", algorithm="HS256")
    assert hs256.unverified_claims(token) == claims


@pytest.mark.parametrize("token", ["", "a.b", "a.!!!.c", "a.bm90IGpzb24.c", "a.WzFd.c"])
def test_what_is_not_a_jwt_is_a_value_error(token: str) -> None:
    with pytest.raises(ValueError):
        hs256.unverified_claims(token)
