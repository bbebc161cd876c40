"""Communication graphs of decentralized training and their mixing matrices.

A decentralized run keeps K parameter replicas, one per worker, and mixes them over a
graph: Θ ← W Θ, where Θ holds the replicas as rows. ``mixing_matrix`` builds W for an
undirected topology with Metropolis–Hastings weights (w_ij = 1 / (1 + max(d_i, d_j)) on
an edge, the rest on the diagonal): symmetric and doubly stochastic for every connected
graph, so the replicas' mean is conserved and they converge to it. How fast is read off
the spectral gap 1 − |λ₂(W)| (``spectral_gap``): 1 for the complete graph (all-reduce:
one mix reaches consensus), O(1/K²) for a ring.

``exponential_push_matrix`` is SGP's time-varying directed exponential graph: at round t
node i sends to i + 2^(t mod log₂K) (mod K), a column-stochastic matrix (push-sum).

Bad input raises ``ConfigError`` in one line naming the setting.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from hybrid.errors import ConfigError

TOPOLOGIES = ("ring", "torus", "exponential", "complete", "random-regular")


def build_graph(name: str, nodes: int, degree: int = 3, seed: int = 0) -> nx.Graph:
    """The undirected graph ``name`` on ``nodes`` nodes; refuses one that cannot be built
    for this many nodes, or that is not connected."""
    if nodes < 2:
        raise ConfigError(
            f"workers: decentralized training needs at least 2 replicas to mix; got {nodes}"
        )
    if name == "ring":
        graph = nx.cycle_graph(nodes)
    elif name == "torus":
        rows, cols = torus_shape(nodes)
        graph = nx.Graph()
        graph.add_nodes_from(range(nodes))
        for r in range(rows):
            for c in range(cols):
                node = r * cols + c
                graph.add_edge(node, r * cols + (c + 1) % cols)
                graph.add_edge(node, ((r + 1) % rows) * cols + c)
    elif name == "exponential":
        graph = nx.Graph()
        graph.add_nodes_from(range(nodes))
        for node in range(nodes):
            for hop in exponential_hops(nodes):
                graph.add_edge(node, (node + hop) % nodes)
    elif name == "complete":
        graph = nx.complete_graph(nodes)
    elif name == "random-regular":
        if not 1 <= degree < nodes or (nodes * degree) % 2:
            raise ConfigError(
                f"degree: no {degree}-regular graph on {nodes} workers exists; choose "
                f"1 <= degree < {nodes} with workers x degree even"
            )
        graph = nx.random_regular_graph(degree, nodes, seed=seed)
    else:
        raise ConfigError(f"topology: unknown {name!r}; choose one of {', '.join(TOPOLOGIES)}")
    graph.remove_edges_from(list(nx.selfloop_edges(graph)))  # a 2-node ring's double edge
    if not nx.is_connected(graph):
        raise ConfigError(
            f"topology: the {name} graph on {nodes} workers (degree {degree}, seed {seed}) is "
            "not connected, so the replicas would never agree; raise degree or choose another"
        )
    return graph


def torus_shape(nodes: int) -> tuple[int, int]:
    """rows × cols = nodes with both >= 2, as square as possible."""
    for rows in range(math.isqrt(nodes), 1, -1):
        if nodes % rows == 0:
            return rows, nodes // rows
    raise ConfigError(
        f"topology: a 2-D torus needs workers = rows x cols with rows, cols >= 2; {nodes} "
        "workers cannot be laid out so (use ring or exponential)"
    )


def exponential_hops(nodes: int) -> list[int]:
    """1, 2, 4, ... below ``nodes``: the exponential graph's peer offsets."""
    return [2**k for k in range(max(1, math.ceil(math.log2(nodes))))]


def mixing_matrix(graph: nx.Graph) -> np.ndarray:
    """Metropolis–Hastings weights of ``graph``: symmetric, doubly stochastic (float64)."""
    nodes = graph.number_of_nodes()
    w = np.zeros((nodes, nodes))
    for i, j in graph.edges:
        w[i, j] = w[j, i] = 1.0 / (1 + max(graph.degree[i], graph.degree[j]))
    w[np.diag_indices(nodes)] = 1.0 - w.sum(axis=1)
    return w


def spectral_gap(w: np.ndarray) -> float:
    """1 − |λ₂(W)|, the second-largest eigenvalue magnitude of a symmetric W."""
    magnitudes = np.sort(np.abs(np.linalg.eigvalsh(w)))[::-1]
    return float(1.0 - magnitudes[1])


def exponential_push_matrix(nodes: int, round_index: int, peers: int = 1) -> np.ndarray:
    """SGP's column-stochastic P for one round: node i keeps 1/(peers+1) of its mass and
    pushes as much to each of its ``peers`` out-neighbours i + 2^m (m cycling with rounds)."""
    hops = exponential_hops(nodes)
    p = np.zeros((nodes, nodes))
    share = 1.0 / (peers + 1)
    for sender in range(nodes):
        p[sender, sender] += share
        for slot in range(peers):
            hop = hops[(round_index * peers + slot) % len(hops)]
            p[(sender + hop) % nodes, sender] += share
    return p


def edges_of(p: np.ndarray) -> list[tuple[int, int]]:
    """(sender, receiver) for every off-diagonal non-zero entry of a mixing matrix."""
    receivers, senders = np.nonzero(p - np.diag(np.diag(p)))
    return [(int(s), int(r)) for r, s in zip(receivers, senders, strict=True)]


__all__ = [
    "TOPOLOGIES",
    "build_graph",
    "edges_of",
    "exponential_hops",
    "exponential_push_matrix",
    "mixing_matrix",
    "spectral_gap",
    "torus_shape",
]
