"""Fixtures for the shoal package's tests: a real cluster, never a fake.

The cluster is the one whose cluster file SHOAL_CLUSTER names; python/tests/run
starts one with `shoal up` (and `shoal agent`, the node's credential broker)
and stops it afterwards, and names the `shoal` binary in SHOAL_BIN (the
tests read the servers' counters with `shoal stats`). Each test works in a directory of its own.
"""

import os
import uuid

import pytest

import shoal


@pytest.fixture(scope="session")
def cluster_file():
    path = os.environ.get("SHOAL_CLUSTER")
    if not path:
        pytest.fail("SHOAL_CLUSTER must name a running cluster's file (python/tests/run starts one)")
    return path


@pytest.fixture(scope="session")
def client(cluster_file):
    with shoal.Client(cluster_file) as c:
        yield c


@pytest.fixture
def base(client, request):
    """A fresh directory for one test: /<test name>-<random>."""
    path = f"/{request.node.name.replace('[', '-').rstrip(']')}-{uuid.uuid4().hex[:8]}"
    client.mkdir(path)
    return path
