"""The Faust worker's credentials come from the same settings as every other client's."""

from __future__ import annotations

import pytest
from faust.auth import SASLCredentials, SSLCredentials
from faust.types.auth import AuthProtocol, SASLMechanism

from common.settings import Settings
from correlators.broker_auth import faust_credentials


def test_plaintext_has_no_credentials() -> None:
    assert faust_credentials(Settings(kafka_security_protocol="PLAINTEXT")) is None


def test_scram_over_sasl_plaintext() -> None:
    creds = faust_credentials(Settings(kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="SCRAM-SHA-512",
                                       kafka_username="faultline-correlator", kafka_password="s3cret-pw"))
    assert isinstance(creds, SASLCredentials)
    assert creds.protocol is AuthProtocol.SASL_PLAINTEXT and creds.mechanism is SASLMechanism.SCRAM_SHA_512
    assert (creds.username, creds.password) == ("faultline-correlator", "s3cret-pw")
    assert "s3cret-pw" not in repr(creds)


def test_tls_variants_carry_a_verifying_context() -> None:
    sasl_ssl = faust_credentials(Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="SCRAM-SHA-256",
                                          kafka_username="u", kafka_password="p"))
    assert isinstance(sasl_ssl, SASLCredentials) and sasl_ssl.protocol is AuthProtocol.SASL_SSL
    assert sasl_ssl.ssl_context is not None and sasl_ssl.ssl_context.check_hostname
    assert isinstance(faust_credentials(Settings(kafka_security_protocol="SSL")), SSLCredentials)


def test_a_mechanism_faust_lacks_is_refused_with_the_ones_it_has() -> None:
    settings = Settings(kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism="SCRAM-SHA-1",
                        kafka_username="u", kafka_password="p")
    with pytest.raises(ValueError, match="SCRAM-SHA-512"):
        faust_credentials(settings)
