"""The test suite. Its folders mirror clawdesk/: tests/X/ tests clawdesk/X/, tests/test_Y.py tests clawdesk/Y.py.

Cross-cutting tests (crash, hostile input, privacy, concurrency, scale) are in system/, shared helpers in support/,
and the fixtures every folder uses in conftest.py. A package, so that helpers import as ``tests.support.*``."""
