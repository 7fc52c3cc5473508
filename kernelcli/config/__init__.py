"""The run specification: YAML configuration -> validated, frozen value objects.

``load_config`` reads and validates a YAML file; ``check_architecture`` then
checks the layers against the data's per-example shape, and
``bind_architecture`` gives the layers one ``filter``/``window``/``strides``
entry per spatial axis of that shape (what the kernels take). Everything raises
:class:`kernelcli.errors.ConfigError` for a user's mistake.

``layer_type(layer)`` is a layer's declaration (``LayerType``: YAML name,
parameters, shape rule, flags); ``layer_types()`` lists them all, for the
kernels' own table and the tests that check every layer is complete.
``branches(layer)`` are the layer lists a ``residual`` or ``parallel`` holds,
and ``walk(layers)`` every layer, nested ones included: the one way any stage
looks inside a layer.
"""

# The registry's table first: the stages below look layers up in it.
from . import _layer_types  # noqa: F401
from ._allowed import DTYPES as DTYPES
from ._allowed import ENGINES as ENGINES
from ._allowed import EXECUTORS as EXECUTORS
from ._allowed import KINDS as KINDS
from ._allowed import LAYOUTS as LAYOUTS
from ._allowed import PARAMETERIZATIONS as PARAMETERIZATIONS
from ._allowed import PATCH_KEYS as PATCH_KEYS
from ._allowed import Architecture as Architecture
from ._allowed import ComputeSpec as ComputeSpec
from ._allowed import DataSpec as DataSpec
from ._allowed import KernelSpec as KernelSpec
from ._allowed import OutputSpec as OutputSpec
from ._allowed import Readouts as Readouts
from ._allowed import RunConfig as RunConfig
from ._allowed import base_kind as base_kind
from ._allowed import is_kernel_name as is_kernel_name
from ._allowed import readout_name as readout_name
from ._augment import AUGMENTS as AUGMENTS
from ._augment import check_augment as check_augment
from ._augment import flip_group as flip_group
from ._augment import parse_augment as parse_augment
from ._augment import show_augment as show_augment
from ._check import check_architecture as check_architecture
from ._check import layer_shapes as layer_shapes
from ._engine import ENGINE_NAMES as ENGINE_NAMES
from ._engine import Engine as Engine
from ._layer_types import AFFINE as AFFINE
from ._layer_types import NONLINEARITIES as NONLINEARITIES
from ._layer_types import POOLS as POOLS
from ._layer_types import Layer as Layer
from ._layers import PADDINGS as PADDINGS
from ._layers import ABRelu as ABRelu
from ._layers import AvgPool as AvgPool
from ._layers import Conv as Conv
from ._layers import Dense as Dense
from ._layers import Erf as Erf
from ._layers import Flatten as Flatten
from ._layers import Gelu as Gelu
from ._layers import GlobalAvgPool as GlobalAvgPool
from ._layers import Identity as Identity
from ._layers import LayerNorm as LayerNorm
from ._layers import Parallel as Parallel
from ._layers import Relu as Relu
from ._layers import Residual as Residual
from ._layers_elementwise import Exp as Exp
from ._layers_elementwise import Gaussian as Gaussian
from ._layers_elementwise import Hermite as Hermite
from ._layers_elementwise import Monomial as Monomial
from ._layers_elementwise import Rbf as Rbf
from ._layers_elementwise import RectifiedMonomial as RectifiedMonomial
from ._layers_elementwise import Sign as Sign
from ._layers_elementwise import Sin as Sin
from ._layers_spatial import ConvLocal as ConvLocal
from ._layers_spatial import ConvTranspose as ConvTranspose
from ._layers_spatial import GlobalSumPool as GlobalSumPool
from ._layers_spatial import LocalAvgPool as LocalAvgPool
from ._layers_spatial import SumPool as SumPool
from ._load import load_config as load_config
from ._load import parse_architecture as parse_architecture
from ._load import parse_config as parse_config
from ._parse_layers import LAYER_NAMES as LAYER_NAMES
from ._rank import SPATIAL_FIELDS as SPATIAL_FIELDS
from ._rank import as_pairs as as_pairs
from ._rank import bind_architecture as bind_architecture
from ._rank import bind_layers as bind_layers
from ._rank import bound_axes as bound_axes
from ._registry import LayerType as LayerType
from ._registry import Spelling as Spelling
from ._registry import branches as branches
from ._registry import layer_type as layer_type
from ._registry import layer_types as layer_types
from ._registry import walk as walk
from ._settings import dtype as read_dtype  # noqa: F401 - renamed: re-exported all the same
from ._settings import engine as read_engine  # noqa: F401
from ._settings import memory as read_memory  # noqa: F401
from ._shapes import spatial_out as spatial_out
from ._shapes import transpose_out as transpose_out
from ._sizes import format_size as format_size
from ._sizes import parse_size as parse_size
