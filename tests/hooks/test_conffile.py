"""Values written into Slurm's config files (hooks/conffile.py): escaped or refused, and list options merged."""

from __future__ import annotations

import pytest

from hooks import conffile
from slinky_common.errors import BadHookRequest


def test_merged_config_unions_list_options_and_ours_win_on_key_collisions():
    ours = {"AuthAltParameters": ["jwt_key=/etc/slurm/jwt.key"], "AuthInfo": ["use_client_ids"]}
    assert conffile.merged_config(ours, "") == []
    assert conffile.merged_config(ours, "AuthInfo=Cred_Expire=70 # comment\nauthinfo=ttl=5,cred_expire=60") == [
        "AuthInfo=cred_expire=60,ttl=5,use_client_ids"
    ]
    assert conffile.merged_config(ours, "AuthAltParameters=jwt_key=/x,\\\n  disable_token_creation") == [
        "AuthAltParameters=disable_token_creation,jwt_key=/etc/slurm/jwt.key"
    ]
    # option names are case-insensitive to Slurm, values (paths) are not
    ours = {"AuthAltParameters": ["jwt_key=/etc/slurm/jwt.key"]}
    assert conffile.merged_config(ours, "AuthAltParameters=JWKS=/etc/slurm/JWKS.json") == [
        "AuthAltParameters=jwks=/etc/slurm/JWKS.json,jwt_key=/etc/slurm/jwt.key"
    ]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("db.example", "db.example"),
        ("pa#ss", "pa\\#ss"),
        ("back\\slash", "back\\\\slash"),
        ("two words", '"two words"'),
        ('no"space', 'no"space'),
        ('"leading', None),
        ('say "hi" there', None),
        ("line\nPluginDir=/tmp", None),
        ("nul\0", None),
    ],
)
def test_conf_value_escapes_or_refuses(value, written):
    assert conffile.conf_value(value) == written


def test_conf_field_names_the_field():
    with pytest.raises(BadHookRequest, match=r"spec\.storageConfig\.host cannot be written"):
        conffile.conf_field("db\nPluginDir=/tmp", "spec.storageConfig.host")
