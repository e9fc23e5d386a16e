"""The Faust worker's broker credentials, from the same settings the confluent-kafka clients use.

The other stages hand :meth:`common.settings.Settings.kafka_config` to librdkafka; Faust
speaks to Kafka through aiokafka, which takes a credentials object instead. Both are built from
``FAULTLINE_KAFKA_SECURITY_PROTOCOL``, ``_SASL_MECHANISM``, ``_USERNAME`` and ``_PASSWORD``, so a
worker can never connect differently from the rest of the pipeline. TLS verifies the brokers
against ``FAULTLINE_KAFKA_SSL_CA_FILE`` (a private CA) or else the system's CA store (as
librdkafka does), and presents ``FAULTLINE_KAFKA_SSL_CERT_FILE``/``_KEY_FILE`` when set (mTLS).
"""

from __future__ import annotations

import ssl

from faust.auth import SASLCredentials, SSLCredentials
from faust.types.auth import CredentialsT, SASLMechanism

from common.settings import Settings

__all__ = ["faust_credentials", "tls_context"]


def tls_context(settings: Settings) -> ssl.SSLContext:
    """A verifying TLS context: the private CA when configured, else the system's; our certificate if set."""
    cafile = str(settings.kafka_ssl_ca_file) if settings.kafka_ssl_ca_file else None
    context = ssl.create_default_context(cafile=cafile)
    if settings.kafka_ssl_cert_file is not None:
        password = settings.kafka_ssl_key_password.get_secret_value() if settings.kafka_ssl_key_password else None
        context.load_cert_chain(str(settings.kafka_ssl_cert_file),
                                str(settings.kafka_ssl_key_file) if settings.kafka_ssl_key_file else None, password)
    return context


def faust_credentials(settings: Settings) -> CredentialsT | None:
    """Faust's ``broker_credentials`` for ``settings`` (None: plaintext, no authentication)."""
    protocol = settings.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return None
    if protocol == "SSL":
        return SSLCredentials(tls_context(settings))
    if not settings.kafka_sasl_mechanism:
        raise ValueError(f"FAULTLINE_KAFKA_SECURITY_PROTOCOL={protocol} needs FAULTLINE_KAFKA_SASL_MECHANISM "
                         "(e.g. SCRAM-SHA-512)")
    try:
        mechanism = SASLMechanism(settings.kafka_sasl_mechanism)
    except ValueError:
        raise ValueError(f"the correlator cannot use SASL mechanism {settings.kafka_sasl_mechanism!r}; use one of "
                         f"{', '.join(m.value for m in SASLMechanism)}") from None
    return SASLCredentials(
        username=settings.kafka_username,
        password=settings.kafka_password.get_secret_value() if settings.kafka_password else None,
        mechanism=mechanism,
        ssl_context=tls_context(settings) if protocol == "SASL_SSL" else None,
    )
