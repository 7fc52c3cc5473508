"""``python -m kernelcli``: the same command line as the ``kernelcli`` script (for an
interpreter whose scripts folder is not on PATH, or a checkout run from PYTHONPATH)."""

from .cli import main

if __name__ == "__main__":
    main()
