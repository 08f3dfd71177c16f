"""Bundled profiles (YAML); installed as the package data of `clustercheck.profiles`."""
