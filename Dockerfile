# The panel image: web (uvicorn, python -m panel.web), panel worker and beat run from it with different commands.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PANEL_DATA_DIR=/var/lib/ascend-panel
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client rsync \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY panel ./panel
COPY workers ./workers
RUN pip install --no-cache-dir .
COPY manage.py ./
COPY templates ./templates
COPY static ./static
COPY locale ./locale
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --no-input -v 0
RUN useradd --system --home /var/lib/ascend-panel panel && mkdir -p /var/lib/ascend-panel \
    && chown panel /var/lib/ascend-panel
USER panel
EXPOSE 8000
CMD ["python", "-m", "panel.web", "--host", "0.0.0.0", "--port", "8000"]
