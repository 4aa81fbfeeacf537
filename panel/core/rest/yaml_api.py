"""YAML bodies and answers for the API: a deployment spec is often kept as a YAML file in a repository."""

import yaml
from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer

from panel.core.rest.safe_input import UnsafeInput, clip, load_yaml


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        # Aliases capped, depth and size bounded, duplicate keys refused (panel/core/rest/safe_input.py).
        try:
            return load_yaml(stream.read().decode("utf-8"))
        except UnsafeInput as error:
            raise ParseError(str(error)) from None
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise ParseError(
                _("The body is not valid YAML: {error}").format(error=clip(str(error), 300))
            ) from None


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"


class TextYAMLParser(YAMLParser):
    media_type = "text/yaml"


YAML_PARSERS = (YAMLParser, XYAMLParser, TextYAMLParser)


class YAMLRenderer(BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode("utf-8")


class SpecJSONRenderer(JSONRenderer):
    """`?format=spec`: the object as the spec that PUT accepts (the view checks the format)."""

    format = "spec"


class SpecYAMLRenderer(YAMLRenderer):
    format = "spec"
