"""KRaft cluster ids generated for the local broker are valid storage-tool arguments."""

import base64

from service.local.kafka import random_cluster_id


def test_cluster_ids_never_look_like_options() -> None:
    # one in 64 raw ids starts with "-"; 5000 draws would hit that about 78 times
    ids = [random_cluster_id() for _ in range(5000)]
    assert not any(i.startswith("-") for i in ids)
    for cluster_id in ids[:50]:
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
