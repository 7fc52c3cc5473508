"""kernelcli: infinite-width NNGP and NTK kernel matrices for convolutional networks."""

__version__ = "0.1.0"
