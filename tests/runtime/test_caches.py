"""The driver's kernel cache a run sizes where the user set nothing."""

from tfseg.runtime import caches


def test_an_unset_cache_size_is_set_and_the_users_own_is_kept():
    environ = {}
    assert caches.warm_start(environ) == {"CUDA_CACHE_MAXSIZE": str(4 * 2**30)}
    assert environ == {"CUDA_CACHE_MAXSIZE": str(4 * 2**30)}
    own = {"CUDA_CACHE_MAXSIZE": "1"}
    assert caches.warm_start(own) == {} and own == {"CUDA_CACHE_MAXSIZE": "1"}

