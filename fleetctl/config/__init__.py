"""Site configuration: the schema, validation, and loading a site file into the cluster model.

`load_site` returns a `fleetctl.model.cluster.Cluster`: the site file is where a cluster is described,
the `Cluster` is what the code holds, and a parameter that holds one is called `cluster`.
"""

from fleetctl.config.site import load_site, parse_site, site_from_document

__all__ = ["load_site", "parse_site", "site_from_document"]
