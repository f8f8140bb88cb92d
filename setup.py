"""Every package under the three source roots goes into the distribution, found rather than listed (a listed
package that was forgotten is missing from the wheel). The rest of the metadata is in pyproject.toml."""

from setuptools import find_packages, setup

# import name -> folder: the instrumentors and the collector live beside the package but import as its children
SOURCE_ROOTS = {
    "lightning_otel": "lightning_otel",
    "lightning_otel.instrumentors": "instrumentors",
    "lightning_otel.collector": "collector",
}

packages = [
    name
    for root, folder in SOURCE_ROOTS.items()
    for name in [root, *(f"{root}.{sub}" for sub in find_packages(folder))]
]
setup(packages=packages, package_dir=SOURCE_ROOTS)
