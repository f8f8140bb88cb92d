"""Serving: the HTTP servers of the policy side. The loopback app server base, the policy gateway in front of the
inference replicas, the CPU replica (a Hugging Face model behind the OpenAI API in vLLM's format) and the one
vLLM-format response builder that the replica and the test server share.

May import capture (the gateway records every policy call as an LLM span) and the collector's client.
"""
