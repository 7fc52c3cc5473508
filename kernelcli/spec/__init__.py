"""The run specification: YAML configuration -> validated, frozen value objects.

``load_config`` reads and validates a YAML file; ``check_architecture`` then
checks the layers against the data's per-example shape. Everything raises
:class:`kernelcli.errors.ConfigError` for a user's mistake.

``layer_type(layer)`` is a layer's declaration (``LayerType``: YAML name,
parameters, shape rule, flags); ``layer_types()`` lists them all, for the
kernels' own table and the tests that check every layer is complete.
"""

from ._check import check_architecture as check_architecture
from ._check import layer_shapes as layer_shapes
from ._config import DTYPES as DTYPES
from ._config import EXECUTORS as EXECUTORS
from ._config import KINDS as KINDS
from ._config import LAYOUTS as LAYOUTS
from ._config import PARAMETERIZATIONS as PARAMETERIZATIONS
from ._config import Architecture as Architecture
from ._config import ComputeSpec as ComputeSpec
from ._config import DataSpec as DataSpec
from ._config import KernelSpec as KernelSpec
from ._config import OutputSpec as OutputSpec
from ._config import RunConfig as RunConfig
from ._layers import AFFINE as AFFINE
from ._layers import NONLINEARITIES as NONLINEARITIES
from ._layers import PADDINGS as PADDINGS
from ._layers import POOLS as POOLS
from ._layers import ABRelu as ABRelu
from ._layers import AvgPool as AvgPool
from ._layers import Conv as Conv
from ._layers import Dense as Dense
from ._layers import Erf as Erf
from ._layers import Flatten as Flatten
from ._layers import Gelu as Gelu
from ._layers import GlobalAvgPool as GlobalAvgPool
from ._layers import Identity as Identity
from ._layers import Layer as Layer
from ._layers import LayerNorm as LayerNorm
from ._layers import Relu as Relu
from ._layers import Residual as Residual
from ._layers_spatial import ConvLocal as ConvLocal
from ._layers_spatial import ConvTranspose as ConvTranspose
from ._layers_spatial import GlobalSumPool as GlobalSumPool
from ._layers_spatial import SumPool as SumPool
from ._load import load_config as load_config
from ._load import parse_architecture as parse_architecture
from ._load import parse_config as parse_config
from ._parse_layers import LAYER_NAMES as LAYER_NAMES
from ._registry import LayerType as LayerType
from ._registry import Spelling as Spelling
from ._registry import layer_type as layer_type
from ._registry import layer_types as layer_types
from ._shapes import spatial_out as spatial_out
from ._shapes import transpose_out as transpose_out
from ._sizes import format_size as format_size
from ._sizes import parse_size as parse_size
