from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import views

app_name = "frontend"
urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="frontend/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.overview, name="overview"),
]
