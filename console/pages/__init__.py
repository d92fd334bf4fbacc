"""The web console's pages, one module per left-navigation entry.

Views here parse the request, call a service of the owning app, and render a page or, when
`request.htmx` asks for it, one named partial of the same template.
"""
