from infermatrix.core.redact import REDACTED, redact_argv, shell_join


def test_api_key_flag_forms_are_redacted():
    argv = ["vllm", "serve", "m", "--api-key", "sk-secret-1", "--port", "8000", "--api-key=sk-secret-2"]
    out = redact_argv(argv)
    assert "sk-secret-1" not in out and "--api-key=sk-secret-2" not in out
    assert out[4] == REDACTED and out[-1] == f"--api-key={REDACTED}"
    assert shell_join(out).count(REDACTED) == 2


def test_known_secret_inside_other_args():
    out = redact_argv(["x", "--header", "Authorization: Bearer sk-abcdef"], ["sk-abcdef"])
    assert "sk-abcdef" not in " ".join(out)
