"""Site configuration: schema, validation and the Site model."""

from fleetctl.config.site import Site, load_site, parse_site

__all__ = ["Site", "load_site", "parse_site"]
