from __future__ import annotations

import copy

import pytest

from semula.core.redact import PATTERNS, REDACTED, contains_secret, redact_obj, redact_text, secret_paths

# Canary secrets, one or more for every pattern: (pattern name, text, the secret part that must vanish).
CANARIES = [
    ("openai_key", "key sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL here", "sk-abcdefghij"),
    ("openai_key", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf-6hIj9", "Ab3dEf6hIj9kLm2n"),
    ("openai_key", "sk-svcacct-Zy9xWv8uTs7rQp6oNm5lKj4i", "Zy9xWv8uTs7rQp6o"),
    (
        "anthropic_key",
        "ANTHROPIC_KEY is sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf-AAAA.",
        "api03-Ab3dEf",
    ),
    (
        "google_api_key",
        "https://x.googleapis.com/v1?key=AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "SyA1b2C3d4",
    ),
    ("aws_access_key_id", "aws_access_key_id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    (
        "github_token",
        "git clone https://ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8@github.com/x/y",
        "a1B2c3D4e5F6",
    ),
    ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "11ABCDEFG0123456789"),
    ("slack_token", "SLACK=xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "123456789012-12345"),
    ("stripe_key", "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("stripe_key", "stripe rk_live_9fD39HqLyjWDarjtT1zdp7dc", "9fD39HqLyjWDarjtT1zdp7dc"),
    (
        "bearer_token",
        "curl -H 'Authorization: Bearer abcDEF123456ghiJKL789' https://api",
        "abcDEF123456ghiJKL789",
    ),
    (
        "jwt",
        "session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9Pl",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ),
    (
        "pem_private_key",
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7v\nQm3X\n-----END RSA PRIVATE KEY-----\n",
        "MIIEpAIBAAKCAQEA7v",
    ),
    (
        "pem_private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n(truncated",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
    ),
    ("authorization_header", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("url_credentials", "connect to postgresql://semula:Pa55word@db:5432/semula", "Pa55word"),
    ("key_value_credential", "api_key=abc123def456&x=1", "abc123def456"),
    ("key_value_credential", "password: hunter2", "hunter2"),
    ("key_value_credential", "export AUTH_TOKEN=zyx987wvu654", "zyx987wvu654"),
    ("key_value_credential", 'secret = "correct horse battery staple"', "correct horse"),
    ("key_value_credential", '{"client_secret": "s3cr3t-value"}', "s3cr3t-value"),
    ("key_value_credential", "X-Api-Key: 0f9e8d7c6b5a", "0f9e8d7c6b5a"),
    ("semula_token", "pasted smt_wHx2SeDqzFmdvBUnRliEbspP34dyHByOpDb0EAd6Plk in chat", "wHx2SeDq"),
    ("gitlab_token", "remote https://oauth2:glpat-Ab3dEf6hIj9kLm2nOp5q@gitlab.com/x", "Ab3dEf6hIj9k"),
    ("huggingface_token", "HF hub login with hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "AbCdEfGhIjKl"),
    ("npm_token", "npm login gave npm_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3d to CI", "Ab3dEf6hIj9k"),
    (
        "sendgrid_key",
        "mail via SG.Ab3dEf6hIj9kLm2nOp5qRs.tUv1wXy4zAb3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6",
        "Ab3dEf6hIj9kLm2nOp5qRs",
    ),
    ("twilio_key", "twilio key SK0123456789abcdef0123456789abcdef ok", "0123456789abcdef"),
    (
        "slack_webhook",
        "post to https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/Ab3dEf6hIj9kLm2nOp5qRs8t",
        "Ab3dEf6hIj9kLm2nOp5qRs8t",
    ),
    # Connection strings: Azure storage and Service Bus, database and broker URLs.
    (
        "key_value_credential",
        "DefaultEndpointsProtocol=https;AccountName=shopdata;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50"
        "uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
        "Eby8vdM02xNOcqFl",
    ),
    (
        "key_value_credential",
        "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmE1Mzk=",
        "Zm9vYmFyYmF6cXV4",
    ),
    (
        "azure_sas_signature",
        "https://shop.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&se=2026-01-01T00:00:00Z"
        "&sig=Zm9vYmFyYmF6cXV4%2BZm9vYmFyYmF6cXV4%3D",
        "Zm9vYmFyYmF6cXV4",
    ),
    (
        "azure_sas_signature",
        "BlobEndpoint=https://shop.blob.core.windows.net/;SharedAccessSignature=sv=2022-11-02&ss=b"
        "&sig=abcdEFGH1234ijklMNOP5678qrstUVWX%3D",
        "abcdEFGH1234",
    ),
    ("url_credentials", "DATABASE_URL=postgresql://app:Tr0ub4dor@db.internal:5432/shop", "Tr0ub4dor"),
    ("url_credentials", "mysql://root:hunter2hunter2@localhost/shop", "hunter2hunter2"),
    ("url_credentials", "mongodb+srv://shop:Pa55w0rdX@cluster0.ab1cd.mongodb.net/shop", "Pa55w0rdX"),
    ("url_credentials", "redis://:s3cretRedisPass@cache:6379/0", "s3cretRedisPass"),
    ("url_credentials", "amqp://shop:rabbitPa55@mq:5672/vhost", "rabbitPa55"),
]

INNOCENT = [
    "Count the tokens in this prompt, then the output tokens.",
    "The token is stored hashed; a secret is never logged.",
    "pip install scikit-learn (the package sk-learn-is-a-machine-learning-library is unrelated)",
    "task-force-alpha-bravo-charlie-2024 and risk-assessment-for-2024-q3-report-final",
    "password: required",
    '{"token": "string", "password": {"type": "string"}}',
    "max_tokens=1000 prompt_tokens: 12345678",
    "a bearer of bad news; bearer bonds",
    "Authorization: pending approval",
    "Basic understanding of secrets management",
    "https://example.com:8080/path?q=1",
    "AKIA is a prefix; sk- and ghp_ are prefixes too",
    "eyJ alone is just three letters",
    "hf_hub_download and npm_config_cache are names, smt_ and glpat- are prefixes",
    "SKU SK-12 from SG.Ltd; see https://hooks.slack.com/services/ for webhooks",
    "a family: \U0001f468\u200d\U0001f469\u200d\U0001f467, soft\u00adhyphen",
    # Connection strings without a credential in them.
    "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey",
    "Set AccountKey= and AccountName=devstoreaccount1; the AccountKey is in the portal",
    "postgresql://db.internal:5432/shop and postgresql://app@db.internal/shop",
    "redis://cache:6379/0, amqp://mq:5672/vhost, mongodb+srv://cluster0.ab1cd.mongodb.net/shop",
    "the sig= parameter of a SAS URL, &sig=short, design=abcdefghijklmnopqrstuvwxyz0123",
]


@pytest.mark.parametrize("name, text, secret", CANARIES)
def test_each_pattern_redacts_its_canary(name, text, secret):
    assert PATTERNS[name].search(text)
    redacted = redact_text(text)
    assert secret not in redacted
    assert REDACTED in redacted


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    "line",
    [
        f"password: aws_secret_access_key = {AWS_SECRET}",
        f"token:\tapi_key: {AWS_SECRET}",
        f"aws_access_key_id = AKIAIOSFODNN7EXAMPLE aws_secret_access_key = {AWS_SECRET}",
        f"region: us-east-1, password: hunter22x; aws_secret_access_key={AWS_SECRET}",
        f'{{"api_key": "abc123def", "aws_secret_access_key": "{AWS_SECRET}"}}',
    ],
)
def test_every_credential_pair_on_a_line_is_redacted(line):
    redacted = redact_text(line)
    assert "wJalrXUtnFEMI" not in redacted and "EXAMPLEKEY" not in redacted
    at = line.index(AWS_SECRET)
    assert line[at - 3 : at] + REDACTED in redacted  # the pair's name stays: only its value goes
    assert redact_text(redacted) == redacted and not contains_secret(redacted)


@pytest.mark.parametrize("text", INNOCENT)
def test_innocent_text_is_left_alone(text):
    assert redact_text(text) == text
    assert not contains_secret(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("api_key=abc123def456 rest", "api_key=[REDACTED] rest"),
        ("Authorization: Bearer abcDEF123456ghiJKL789", "Authorization: Bearer [REDACTED]"),
        ('{"password": "hunter22"}', '{"password": "[REDACTED]"}'),
        ("postgresql://semula:Pa55word@db/x", "postgresql://semula:[REDACTED]@db/x"),
        ("use sk-abcdefghijklmnopqrstuvwxyz0123456789 now", "use [REDACTED] now"),
    ],
)
def test_redaction_keeps_the_context(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("name, text, secret", CANARIES)
def test_redaction_is_idempotent_and_leaves_no_secret(name, text, secret):
    once = redact_text(text)
    assert redact_text(once) == once
    assert not contains_secret(once)


def test_extra_secrets_are_replaced_exactly():
    operator_key = "upstream-key-that-matches-no-pattern"
    text = f"calling with {operator_key} and {operator_key}!"
    assert redact_text(text, [operator_key]) == "calling with [REDACTED] and [REDACTED]!"
    assert contains_secret(text, [operator_key])
    assert not contains_secret(text)


def test_empty_and_short_extra_secrets_are_ignored():
    assert redact_text("a b c", ["", "b"]) == "a b c"


def test_redact_obj_touches_strings_only():
    obj = {
        "api_key=abc123def456": "sk-abcdefghijklmnopqrstuvwxyz0123456789",
        "messages": [{"role": "user", "content": "my password: hunter2"}, 42, None, True],
        "temperature": 0.5,
    }
    before = copy.deepcopy(obj)
    assert redact_obj(obj) == {
        "api_key=abc123def456": "[REDACTED]",
        "messages": [{"role": "user", "content": "my password: [REDACTED]"}, 42, None, True],
        "temperature": 0.5,
    }
    assert obj == before


def test_contains_secret_looks_into_nested_values():
    assert contains_secret({"a": [{"b": "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"}]})
    assert not contains_secret({"a": [{"b": "nothing to see"}, 1, None]})
    assert not contains_secret(redact_obj({"a": [{"b": "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"}]}))


def test_a_key_split_by_invisible_characters_is_redacted():
    key = "sk-abcdefghij\u200bklmnopqrstuvwx\u2060yz0123456789"
    text = f"use {key} and \U0001f468\u200d\U0001f469"
    redacted = redact_text(text)
    assert "abcdefghij" not in redacted and "yz0123456789" not in redacted
    assert redacted == redact_text(redacted) and not contains_secret(redacted)
    assert contains_secret({"a": [key]})
    assert redact_text("github: ghp_\ufeff" + "a1B2" * 10) == "github: [REDACTED]"


def test_secret_paths_name_where_never_what():
    key = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    value = {
        "messages": [{"content": "fine"}, {"content": f"token {key}"}],
        "metadata": {key: "the key is the secret", "note": "fine"},
    }
    paths = list(secret_paths(value, path="entries[3]"))
    assert paths == ["entries[3].messages[].content", "entries[3].metadata (an object key)"]
    nested = {key: {"auth": "password: hunter22"}}
    assert list(secret_paths(nested, path="config")) == ["config (an object key)", "config.[REDACTED].auth"]
    assert all("a1B2" not in p for p in paths + list(secret_paths(nested)))
