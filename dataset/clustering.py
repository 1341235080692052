"""K-means over MGUP, MGMAP and MaGTSAMP, after the published Clustering notebook (k = 3, random_state 0, on measured
and synthetic rows), with the elbow (inertia for k = 1..K, Kneedle's knee), and the notebook's "distance" (the sum of a
row's distances to every centroid)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

FEATURES = ("MGUP", "MGMAP", "MaGTSAMP")
SEED = 0


@dataclass(frozen=True)
class Clusters:
    k: int
    labels: np.ndarray  # cluster of each row, numbered by ascending MGUP of the centroid
    centroids: pd.DataFrame  # one row per cluster, FEATURES as columns
    sizes: list[int]
    distance: np.ndarray  # the notebook's: each row's summed distance to all centroids


def kmeans(rows: pd.DataFrame, k: int = 3, features=FEATURES) -> Clusters:
    from sklearn.cluster import KMeans

    X = rows[list(features)].to_numpy(float)
    model = KMeans(n_clusters=k, random_state=SEED, n_init=10).fit(X)
    order = np.argsort(model.cluster_centers_[:, 0])  # cluster 0 has the lowest MGUP
    relabel = np.empty(k, dtype=int)
    relabel[order] = np.arange(k)
    labels = relabel[model.labels_]
    centroids = pd.DataFrame(model.cluster_centers_[order], columns=list(features))
    return Clusters(k, labels, centroids, [int((labels == i).sum()) for i in range(k)], model.transform(X).sum(axis=1))


def elbow(rows: pd.DataFrame, most: int = 8, features=FEATURES) -> pd.Series:
    """Inertia (within-cluster sum of squares) for k = 1..most (fewer when there are fewer rows)."""
    from sklearn.cluster import KMeans

    X = rows[list(features)].to_numpy(float)
    ks = range(1, min(most, len(X)) + 1)
    return pd.Series([KMeans(n_clusters=k, random_state=SEED, n_init=10).fit(X).inertia_ for k in ks], index=list(ks))


def elbow_k(inertia: pd.Series) -> int:
    """The elbow, as Kneedle finds it: with k and the inertia both scaled to 0-1, the k farthest below the straight
    line from the first point to the last. 1 when there are fewer than 3 values."""
    if len(inertia) < 3:
        return 1
    k = inertia.index.to_numpy(float)
    x = (k - k[0]) / (k[-1] - k[0])
    y = (inertia.to_numpy(float) - inertia.iloc[-1]) / (inertia.iloc[0] - inertia.iloc[-1])
    return int(k[np.argmax((1.0 - x) - y)])


def plot(rows: pd.DataFrame, clusters: Clusters, inertia: pd.Series, path, title: str = "") -> None:
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.8))
    left.plot(inertia.index, inertia.values, marker="o")
    left.axvline(elbow_k(inertia), color="grey", linestyle="--", label=f"elbow: k = {elbow_k(inertia)}")
    left.set_xlabel("k")
    left.set_ylabel("inertia (sum of squared distances)")
    left.set_title(f"{title}elbow ({len(rows)} rows)")
    left.legend()
    synthetic = rows["synthetic"].to_numpy(bool) if "synthetic" in rows else np.zeros(len(rows), bool)
    for ax, (x, y) in ((middle, ("MGUP", "MGMAP")), (right, ("MGUP", "MaGTSAMP"))):
        for c in range(clusters.k):
            chosen = clusters.labels == c
            ax.scatter(
                rows[x][chosen & ~synthetic],
                rows[y][chosen & ~synthetic],
                s=30,
                color=f"C{c}",
                label=f"cluster {c} ({clusters.sizes[c]})",
            )
            ax.scatter(rows[x][chosen & synthetic], rows[y][chosen & synthetic], s=12, color=f"C{c}", alpha=0.35)
        ax.scatter(clusters.centroids[x], clusters.centroids[y], marker="+", s=250, color="black", label="centroid")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(f"{title}k = {clusters.k} (faint: synthetic rows)")
    middle.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
