"""Build configuration beyond pyproject.toml: the compiled record walk.

The extension is optional: without a C compiler, the Python headers or zlib's
headers, the package installs without it and ``rt_appliance.log.scan`` walks
records in Python (the same results, several times slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rt_appliance.log._walk",
            sources=["rt_appliance/log/_walk.c"],
            libraries=["z"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
