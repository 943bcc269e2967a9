"""`tf.distribute` strategies by name, and who is the chief.

Example:
>>> strategy = create_strategy("one_device")
>>> strategy.num_replicas_in_sync, worker_index(strategy), num_workers(strategy)
(1, 0, 1)
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from bert_tf.errors import BertTfError

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


def create_strategy(
    name: str,
    tpu_name: str | None = None,
    tpu_zone: str | None = None,
    gcp_project: str | None = None,
) -> tf.distribute.Strategy:
    """A strategy: `one_device` (the first GPU, else the CPU), `mirrored` (every local
    GPU), `multi_worker_mirrored` (the workers of `TF_CONFIG`) or `tpu` (`tpu_name`).

    Create it before any other TensorFlow work: the multi-worker and TPU strategies
    (re)configure the runtime when they start.
    """
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        _check_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        return _tpu_strategy(tpu_name, tpu_zone, gcp_project)
    raise BertTfError(f"Unknown --distribution_strategy {name!r}; use one of {', '.join(STRATEGIES)}.")


def _check_tf_config() -> None:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return  # a single worker: MultiWorkerMirroredStrategy runs alone
    try:
        config = json.loads(raw)
        config["cluster"]["worker"], config["task"]["index"]  # noqa: B018 - both must exist
    except (ValueError, KeyError, TypeError):
        raise BertTfError(
            'TF_CONFIG must be JSON like {"cluster": {"worker": ["host:port", ...]}, '
            '"task": {"type": "worker", "index": 0}}.'
        ) from None


def _tpu_strategy(tpu_name: str | None, tpu_zone: str | None, gcp_project: str | None) -> tf.distribute.Strategy:
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu_name or "", zone=tpu_zone, project=gcp_project
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BertTfError(f"Cannot reach the TPU {tpu_name or '(local)'!r}: {reason}.") from None
    return tf.distribute.TPUStrategy(resolver)


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This worker's index among the workers (0 for single-worker strategies)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return 0
    if resolver.task_type == "chief":
        return 0
    # With a "chief" task in the cluster, the workers come after it.
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return int(resolver.task_id or 0) + int(has_chief)


def num_workers(strategy: tf.distribute.Strategy) -> int:
    """How many workers run input pipelines (the hosts of a TPU pod count as one here:
    `TPUStrategy` feeds them through one distributed dataset)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and resolver is not None:
        spec = resolver.cluster_spec().as_dict()
        return max(1, len(spec.get("worker", ())) + len(spec.get("chief", ())))
    return 1


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this worker writes checkpoints, summaries and results."""
    return worker_index(strategy) == 0
