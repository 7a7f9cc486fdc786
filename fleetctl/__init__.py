"""fleetctl: reliability toolkit for Slurm GPU clusters."""

# The release this tree leads to. A built artefact (wheel, sdist, .deb, node bundle) carries its exact
# version from git in fleetctl/_version.py, written by scripts/package (e.g. 0.1.0.dev568+g5c98d7c);
# a source checkout without one says the base version.
BASE_VERSION = "0.1.0"
try:
    from fleetctl._version import version as __version__
except ImportError:
    __version__ = BASE_VERSION
