from setuptools import Extension, setup

# The compiled record walk of the produce validator (kafkatier/log/_record_walk.c) is optional: without a C
# compiler the build skips it and kafkatier.log.log_validator walks records in pure Python (same results).
setup(ext_modules=[Extension("kafkatier.log._record_walk", ["kafkatier/log/_record_walk.c"], optional=True)])
