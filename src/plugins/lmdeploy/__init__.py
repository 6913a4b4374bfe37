"""The ``lmdeploy`` engine kind: launch ``lmdeploy serve api_server`` (or attach), read its capacity and gauges."""
