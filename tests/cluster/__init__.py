"""Tests of the cluster lab (hack/cluster/): its stand-ins, and the scenarios that run on it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack" / "cluster"))  # the lab's package `lab`
