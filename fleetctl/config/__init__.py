"""Site configuration: the schema, validation, and loading a site file into the cluster model.

`load_site` returns a `fleetctl.model.cluster.Cluster`; `Site` is the same class under the name the
code has always used.
"""

from fleetctl.config.site import Site, load_site, parse_site, site_from_document

__all__ = ["Site", "load_site", "parse_site", "site_from_document"]
