"""Platform facts emulated on this host: ADSP paths, consoles, devices, install markers, SoCs, Windows files."""
