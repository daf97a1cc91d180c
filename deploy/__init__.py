"""Deployment material: ``deploy.local`` is the local launcher (a package of
the repository's tooling project, installed editable by ``make venv``)."""
