"""perfseer as a service: a REST API and a web page (``perfseer serve``; needs ``perfseer[serve]``).

:mod:`.sandbox` runs untrusted parsing and exports in limited child processes, :mod:`.graphs`
caches the extracted PerfGraphs, :mod:`.app` holds the routes, ``static/`` the page.
"""
