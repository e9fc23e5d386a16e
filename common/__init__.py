"""The ground floor every stage stands on: settings, Kafka helpers, the metric registry, dead letters.

Producers, correlators, sinks, the deployment helpers and the command line may all import it;
it imports no stage (only :mod:`streams`, the contract). See ARCHITECTURE.md.
"""
