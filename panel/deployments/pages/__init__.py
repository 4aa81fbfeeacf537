"""The HTML edge: the deployment pages, the edit views, the wizard, its forms and session state."""
