"""The node-side check payload.

Every module here runs on the node under the node's own python3 (3.8 or later), standard library only:
`fleetctl.checks.builder.build_payload()` concatenates them into one script piped to `python3 -`.
So: no third-party imports at module level, no `fleetctl` imports except single lines marked
`# payload-local` (the builder drops them, the concatenated names are then global), and names unique
across the modules.
"""
