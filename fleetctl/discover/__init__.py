"""`fleetctl site discover`: build a site file from what the nodes and the fabric say.

    d = discover(transport, nodes, DiscoverOptions(switches="leaf[1-4]"), ib=parse_ibnetdiscover(text))
    text = render(cluster="c1", classes=d.classes, fabric=d.fabric, ...)   # a commented site file
    changes = diff_site(load_site("site.toml"), d, nodes)                   # drift against a file

The whole command (base site, fan-out settings, files, write or diff): command.discover_site.

The node side is one stdlib-only payload (payload/collect.py, shipped with the node-check
collectors); LLDP tables (lldp.py) and ibnetdiscover output (ibnet.py) are parsed on this side, as
untrusted input. docs/discover.md.
"""

from fleetctl.discover.diff import diff_site
from fleetctl.discover.options import DiscoverOptions
from fleetctl.discover.run import Discovery, discover
from fleetctl.discover.sitefile import render, write_site

__all__ = ["DiscoverOptions", "Discovery", "diff_site", "discover", "render", "write_site"]
