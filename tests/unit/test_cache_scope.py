"""The prefix-cache salt of a request: one per (weight-version generation, caller salt)."""

import re

from hypothesis import given
from hypothesis import strategies as st

from engine_plugins.core.cache_scope import version_salt

# What vLLM's HTTP layer accepts as a cache_salt (and so any KV connector behind it).
VLLM_SALT = re.compile(r"[^@/\\\x00]{1,128}")


def test_requests_of_one_version_and_one_caller_salt_share_a_salt():
    assert version_salt(None, 3) == version_salt(None, 3) == version_salt("", 3)
    assert version_salt("mine", 3) == version_salt("mine", 3)


def test_another_version_or_another_caller_salt_is_another_salt():
    salts = {version_salt(caller, generation) for caller in (None, "a", "b") for generation in (0, 1, 2)}
    assert len(salts) == 9
    # One generation on two API processes, one of which missed a bump: two versions, two salts.
    assert version_salt(None, 4, "step-4") != version_salt(None, 4, "step-5")


@given(st.one_of(st.none(), st.text(max_size=300)), st.integers(min_value=0, max_value=10**20 - 1))
def test_every_salt_is_one_vllm_and_sglang_accept(caller, generation):
    salt = version_salt(caller, generation)
    assert VLLM_SALT.fullmatch(salt) and len(salt) < 60
