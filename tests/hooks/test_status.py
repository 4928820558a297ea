from hooks.status import condition

PARENT = {
    "metadata": {"name": "a", "generation": 3},
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "R",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    },
}


def test_condition_keeps_transition_time_only_while_status_holds():
    kept = condition(PARENT, "Ready", True, "AllGood", "fine")
    assert kept == {
        "type": "Ready",
        "status": "True",
        "reason": "AllGood",
        "message": "fine",
        "observedGeneration": 3,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    flipped = condition(PARENT, "Ready", False, "Missing", "gone")
    assert "lastTransitionTime" not in flipped and flipped["status"] == "False"


def test_condition_without_observed_status_or_generation():
    assert condition({"metadata": {}}, "X", True, "R", "m") == {
        "type": "X",
        "status": "True",
        "reason": "R",
        "message": "m",
    }
