"""Ground layer: the one typed cluster model (`cluster`) and the fabric view derived from it (`fabric`)."""
