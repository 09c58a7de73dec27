"""Settings shared by every part: typed config dataclasses built from plain mappings, the field checks they
run, and the device and precision every torch step runs under.

Each setting is declared once, in the config dataclass of the component that uses it, with its range check
in that dataclass's ``__post_init__``; :func:`settings.build.build` turns a mapping (a section of
``params.yaml``) into such a dataclass and names the key path of any bad value.
"""
