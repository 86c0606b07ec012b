"""The service's one version: the package's (setup.cfg reads it), the interface document's
`info.version`, the webhooks' `User-Agent` and the README's newest interface all name this."""

VERSION = "1.6.0"
